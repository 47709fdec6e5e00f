"""The HTTP service, ``skpubsub serve`` (SPEC section 8).

Light to import: the web stack (Starlette, uvicorn, prometheus_client, the ``service``
extra) is imported only when a server is built (:mod:`.app`). The pieces:

- :mod:`.core` — the state machine behind the HTTP API, synchronous and free of the web
  stack: the Gate, one engine, the registrations (tokens, notification rings), the
  write-ahead log and the snapshots; restart = snapshot + log tail.
- :mod:`.wal`, :mod:`.snapshot` — the files in ``--data DIR`` (data, never pickles).
- :mod:`.auth` — the admin key, publish keys, subscription tokens (hashed at rest).
- :mod:`.app` — Starlette routes, the micro-batching applier task, SSE streams, metrics.
- :mod:`.command` — the ``serve`` subcommand's flags.

See ``NOTES.md`` beside this file for the design and the durability loss windows.
"""
