"""The local ParallelCluster API imports without moto: tests/pcluster checks it against the
OpenAPI spec in ParallelCluster's own virtualenv, where moto is not installed (its own
dependencies clash with ours). Caught here in seconds rather than at the end of `make test`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LAYER_SOURCE = Path(__file__).resolve().parents[2] / "layers" / "common"


def test_the_local_pcluster_api_imports_where_moto_is_not_installed() -> None:
    # sys.modules["moto"] = None makes every `import moto...` raise ModuleNotFoundError, as there.
    program = "import sys; sys.modules['moto'] = None; import trainrun.local.pcluster_api"
    env = {**os.environ, "PYTHONPATH": str(LAYER_SOURCE)}
    result = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
