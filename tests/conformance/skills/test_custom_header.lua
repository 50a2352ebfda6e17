--- Conformance fixture (2026-07-28, SEP-2243): a tool whose region argument is mirrored in the Mcp-Param-Region header.
-- @tool Custom header tool
-- @input_schema {"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}},"required":["region"]}
return function(args)
  return "region " .. tostring(args.region)
end
