"""The HTTP routes by resource, each module a router over the shared
:class:`~tidegraph.query_service.service.Service`."""
