"""The lean HTTP/1.1 transport of the load path: keep-alive connections on asyncio Protocols (llhttp parsing the
answers), pooled per run, connecting only to the run's pinned addresses (``connection``, ``pool``)."""
