"""The release: the one place the version is written.

Both distributions take their version from this line when they are built (``tidegraph``
and ``tidegraph-client``, released together), and ``tidegraph --version`` and the HTTP
APIs' OpenAPI ``info.version`` read it at run time, so none of them can disagree.
"""

__version__ = "0.1.0"
