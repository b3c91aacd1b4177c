"""Load run spec tells the workflow which cluster kind a run builds (its Choice states read it)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from trainrun.model.run_record import RunStore

from .test_steps import SINGLE_NODE, load, upload

pytestmark = pytest.mark.usefixtures("no_network")


def on_eks(text: str) -> str:
    document = yaml.safe_load(text)
    document["cluster"] = {"kind": "eks"}
    return yaml.safe_dump(document, sort_keys=False)


def test_an_eks_run_is_loaded_as_an_eks_run(s3: Any, config_bucket: str, store: RunStore) -> None:
    # Given the single-node example on EKS, uploaded as a run file
    # When its spec is loaded
    summary = load(s3, store, upload(s3, config_bucket, on_eks(SINGLE_NODE)))
    # Then the state machine is told to build an EKS cluster, and the record keeps the kind
    assert summary.kind == "eks"
    record = store.get(summary.run_id)
    assert record is not None and record.spec is not None and record.spec.cluster.kind == "eks"


def test_a_parallelcluster_run_is_loaded_as_one(s3: Any, config_bucket: str, store: RunStore) -> None:
    summary = load(s3, store, upload(s3, config_bucket, SINGLE_NODE))
    assert (summary.name, summary.kind) == ("single-node", "parallelcluster")
