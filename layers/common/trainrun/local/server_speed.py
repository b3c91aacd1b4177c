"""Per-request costs of moto's server (5.2.5, pinned) that do not change what it answers.

Every local AWS call is a request to one in-process server, hundreds a run, so a fixed cost per
request is paid hundreds of times:

- `moto.backends.list_of_moto_modules()` lists moto's package directory and stats each entry, on
  every request (werkzeug_app.DomainDispatcherApplication.get_backend_for_host asks it whether the
  host names a service): 1 to 2 ms a request on an idle machine here, more under load. The list
  is fixed once moto is installed, so it is read once. The patch is idempotent.
- CreateStateMachine validates the definition by parsing it with the ASL grammar (antlr, a fifth
  of a runtime's start for the stack's two state machines, and the tests start hundreds). A
  definition that parsed once parses again: its success is remembered (a refusal is not, so an
  invalid definition is refused every time).
- A server's stop waits for its loop to see the shutdown request, which socketserver looks for
  every 0.5 s: most of a runtime's stop, paid by every test that starts one. The local servers
  (moto's, and the ParallelCluster and Kubernetes APIs' of trainrun.local.loopback_server) look every
  SERVER_POLL_SECONDS instead.
"""

from __future__ import annotations

import functools

SERVER_POLL_SECONDS = 0.02


@functools.cache  # once: the patch wraps moto's original
def install() -> None:
    # moto is imported here, not above: the local ParallelCluster API reads SERVER_POLL_SECONDS
    # where moto is not installed (tests/pcluster, in ParallelCluster's own virtualenv).
    from moto import backends
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    listed = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: listed
    validate = functools.lru_cache(maxsize=16)(StepFunctionsParserBackend._validate_definition)
    StepFunctionsParserBackend._validate_definition = staticmethod(validate)  # type: ignore[method-assign]
