"""`trainrun plan`, `validate` and `cluster-config` of a `cluster.kind: eks` run file, offline."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from trainrun.adapters.network import COMPONENTS
from trainrun.cli.common import app
from trainrun.logic.cluster_config import cluster_name
from trainrun.logic.eks_node_group import ADD_ONS, EksIds, render_eks_requests
from trainrun.logic.eks_versions import STANDARD_SUPPORT_VERSIONS, SUPPORTED_KUBERNETES_VERSIONS
from trainrun.logic.prices import PRICES, PriceTable
from trainrun.model.run_file import RunSpec, parse_run_file
from trainrun.model.tags import run_tags
from trainrun.ops.plan import Plan, build_plan, render_text

ROOT = Path(__file__).resolve().parents[2]
EKS_EXAMPLE = ROOT / "examples" / "bert-large-phase1-eks.yaml"
PARALLELCLUSTER_EXAMPLE = ROOT / "examples" / "bert-large-phase1.yaml"


def eks_example(**changes: Any) -> RunSpec:
    """The EKS example, with top-level sections changed."""
    document = yaml.safe_load(EKS_EXAMPLE.read_text())
    document.update(changes)
    return parse_run_file(yaml.safe_dump(document, sort_keys=False))


@pytest.fixture(scope="module")
def eks_plan() -> Plan:
    return build_plan(parse_run_file(EKS_EXAMPLE.read_bytes()))


def resource(plan: Plan, kind: str) -> str:
    [detail] = [r.detail for r in plan.resources if r.kind == kind]
    return detail


# --- what it creates ----------------------------------------------------------------------------


def test_the_plan_lists_the_eks_cluster_its_nodes_add_ons_and_access_entry(eks_plan: Plan) -> None:
    kinds = [r.kind for r in eks_plan.resources]
    assert {"eks-cluster", "launch-template", "node-group", "access-entry"} <= set(kinds)
    assert kinds.count("add-on") == len(ADD_ONS) == 3
    assert {r.detail.split(":")[0] for r in eks_plan.resources if r.kind == "add-on"} == {
        "coredns",
        "aws-fsx-csi-driver",
        "amazon-cloudwatch-observability",
    }
    # And none of a ParallelCluster cluster
    assert "cluster" not in kinds and "log-group" not in kinds
    assert eks_plan.cluster_kind == "eks"


def test_the_launch_template_says_its_reservation_target_and_efa_interface_count(eks_plan: Plan) -> None:
    detail = resource(eks_plan, "launch-template")
    assert "CapacityReservationTarget CapacityReservationId cr-0123456789abcdef0" in detail
    assert "8 EFA interfaces (one per network card)" in detail
    assert "no placement group" in detail


def test_the_cluster_says_its_version_support_and_the_jobs_image(eks_plan: Plan) -> None:
    spec = parse_run_file(EKS_EXAMPLE.read_bytes())
    detail = resource(eks_plan, "eks-cluster")
    assert f"Kubernetes {spec.cluster.eks_settings.kubernetes_version} (standard support)" in detail
    assert spec.cluster.eks_settings.image in detail


def test_the_network_is_every_piece_create_network_makes_for_an_eks_run(eks_plan: Plan) -> None:
    kinds = [r.kind for r in eks_plan.resources]
    assert kinds[: len(COMPONENTS)] == list(COMPONENTS)
    # The public half of 10.0.0.0/16 gives its second quarter to the control plane's second subnet,
    # in another zone: EKS takes subnets in two
    assert resource(eks_plan, "public-subnet").startswith("10.0.0.0/18 in us-west-2d")
    assert resource(eks_plan, "control-plane-subnet").startswith("10.0.64.0/18 in another zone")
    assert resource(eks_plan, "private-subnet").startswith("10.0.128.0/17 in us-west-2d")


def test_the_file_system_and_security_group_are_a_parallelcluster_runs(eks_plan: Plan) -> None:
    parallelcluster = build_plan(parse_run_file(PARALLELCLUSTER_EXAMPLE.read_bytes()))
    shared = {"file-system", "data-repository-association", "nat-gateway", "security-group"}
    assert [r for r in eks_plan.resources if r.kind in shared] == [
        r for r in parallelcluster.resources if r.kind in shared
    ]


def test_the_plan_carries_the_requests_cluster_config_prints(eks_plan: Plan) -> None:
    spec = parse_run_file(EKS_EXAMPLE.read_bytes())
    run_id = eks_plan.run_id
    requests = render_eks_requests(
        spec, EksIds.placeholders(), cluster_name=cluster_name(run_id), tags=run_tags(run_id, "trainrun")
    )
    assert eks_plan.cluster_config == {**requests}


def test_an_eks_plan_has_no_head_node_commands_and_no_timeline_yet(eks_plan: Plan) -> None:
    assert eks_plan.head_node_commands == []
    assert eks_plan.timeline is None
    text = render_text(eks_plan)
    assert "Timeline: the EKS timeline is not modelled yet" in text
    assert "sbatch" not in text


def test_an_eks_plan_lists_the_kubernetes_objects_the_dry_run_checks(eks_plan: Plan) -> None:
    kinds = [(item["kind"], item["metadata"]["name"]) for item in eks_plan.kubernetes_objects]
    assert kinds[0] == ("Namespace", "trainrun")
    assert ("DaemonSet", "neuron-device-plugin") in kinds and ("DaemonSet", "aws-efa-k8s-device-plugin") in kinds
    assert kinds[-3:] == [("Job", "stage"), ("Job", "compile"), ("Job", "train-1")]
    text = render_text(eks_plan)
    assert "Kubernetes objects (each checked by the API server's dry run in Create node group" in text
    assert "  Job train-1 in trainrun: Indexed, 16 pod(s) of 16 aws.amazon.com/neuron, 8 vpc.amazonaws.com/efa" in text


# --- what it costs ------------------------------------------------------------------------------


def test_the_cost_has_the_eks_control_plane_where_a_parallelcluster_run_has_its_head_node(eks_plan: Plan) -> None:
    parallelcluster = build_plan(parse_run_file(PARALLELCLUSTER_EXAMPLE.read_bytes())).cost
    cost = eks_plan.cost
    compute, control_plane, *rest = cost.lines
    assert compute == parallelcluster.lines[0]
    assert rest == parallelcluster.lines[2:]
    assert (control_plane.item, control_plane.quantity, control_plane.unit) == (
        "EKS control plane (standard support)",
        1,
        "cluster",
    )
    assert control_plane.per_hour == PRICES.eks_cluster_per_hour["standard"] == 0.10
    assert not any("head node" in line.item for line in cost.lines)
    assert not any("head node" in note for note in cost.notes)
    # The lines add up to the total, and the total to max_runtime's
    assert cost.per_hour == pytest.approx(sum(line.per_hour or 0 for line in cost.lines), abs=1e-6)
    assert cost.for_max_runtime == pytest.approx(cost.per_hour * 24, abs=1e-4)
    assert cost.partial is False


def test_a_version_in_extended_support_costs_the_extended_hour() -> None:
    extended = [version for version in SUPPORTED_KUBERNETES_VERSIONS if version not in STANDARD_SUPPORT_VERSIONS]
    if not extended:
        pytest.skip("every version EKS creates is in standard support on the version table's date")
    spec = eks_example(cluster={"kind": "eks", "eks": {"kubernetes_version": extended[0]}})
    plan = build_plan(spec)
    control_plane = plan.cost.lines[1]
    assert control_plane.item == "EKS control plane (extended support)"
    assert control_plane.per_hour == PRICES.eks_cluster_per_hour["extended"]
    assert "(extended support)" in resource(plan, "eks-cluster")


def test_the_budget_is_compared_with_the_eks_estimate() -> None:
    plan = build_plan(eks_example(budget={"max_cost_usd": 1000}))
    budget = plan.cost.budget
    assert budget is not None
    assert budget.hours == pytest.approx(1000 / plan.cost.per_hour, abs=1e-3)
    assert budget.covers_max_runtime is False


def test_an_instance_type_the_price_table_lacks_makes_the_estimate_partial() -> None:
    instances = {k: v for k, v in PRICES.instance_per_hour.items() if k != "trn1.32xlarge"}
    prices = dataclasses.replace(PRICES, instance_per_hour=instances)
    assert isinstance(prices, PriceTable)
    cost = build_plan(parse_run_file(EKS_EXAMPLE.read_bytes()), prices=prices).cost
    assert cost.partial is True
    assert any(note.startswith("Partial: the totals leave out compute nodes") for note in cost.notes)
    assert cost.per_hour == pytest.approx(sum(line.per_hour or 0 for line in cost.lines), abs=1e-6)


# --- the commands -------------------------------------------------------------------------------


def test_validate_says_an_eks_run_file_is_valid_with_its_kubernetes_version() -> None:
    version = parse_run_file(EKS_EXAMPLE.read_bytes()).cluster.eks_settings.kubernetes_version
    result = CliRunner().invoke(app, ["validate", str(EKS_EXAMPLE)])
    assert result.exit_code == 0, result.output
    assert f"EKS {version}, max runtime 24h" in result.output.replace("\n", " ")


def test_cluster_config_prints_the_eks_and_ec2_requests_as_yaml() -> None:
    result = CliRunner().invoke(app, ["cluster-config", str(EKS_EXAMPLE)])
    assert result.exit_code == 0, result.output
    printed = yaml.safe_load(result.stdout)
    assert set(printed) == {"cluster", "launch_template", "nodegroup"}
    assert printed["nodegroup"]["amiType"] == "AL2023_x86_64_NEURON"
    assert len(printed["launch_template"]["LaunchTemplateData"]["NetworkInterfaces"]) == 8


def test_plan_refuses_to_draw_the_timeline_of_an_eks_run(tmp_path: Path) -> None:
    png = tmp_path / "timeline.png"
    result = CliRunner().invoke(app, ["plan", str(EKS_EXAMPLE), "--png", str(png)])
    assert result.exit_code != 0
    assert "the EKS timeline is not modelled yet" in result.output
    assert not png.exists()
