--- Conformance fixture: the resource template test://template/{id}/data.
-- @resource test://template/{id}/data application/json
return function(args)
  return { text = string.format('{"id":"%s","templateTest":true,"data":"Data for ID: %s"}', args.id, args.id),
           mimeType = "application/json" }
end
