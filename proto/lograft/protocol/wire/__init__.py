"""Generated gRPC stubs (``make proto``); never edit the ``*_pb2*`` files by hand."""
