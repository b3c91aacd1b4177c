"""`trainrun plan`: what a run creates, what it runs on the head node, and what it costs, offline."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainrun.adapters.network import COMPONENTS
from trainrun.logic.cluster_config import PREVIEW_CONFIG_BUCKET, ClusterIds, render_cluster_config
from trainrun.logic.head_node_scripts import PLAN_END_KEY, prepare_script, submit_script, wrapper_script
from trainrun.logic.prices import HOURS_PER_MONTH, PRICES, PriceTable
from trainrun.model.run_file import FSX_THROUGHPUT_PER_TIB, TRAINIUM_INSTANCE_TYPES, Cluster, RunSpec, parse_run_file
from trainrun.model.tags import run_tags
from trainrun.ops.plan import Plan, build_plan, money, render_text
from trainrun.workflow import State

ROOT = Path(__file__).resolve().parents[2]
BERT = ROOT / "examples" / "bert-large-phase1.yaml"
RUN_ID = "bert-large-phase1-preview"
TRAIN_SBATCH = (
    "sbatch --parsable --exclusive --no-requeue --nodes=16 --job-name=trainrun-bert-large-phase1-preview-train "
    "--output=/fsx/trainrun/bert-large-phase1-preview/logs/train.out --open-mode=append "
    "/fsx/trainrun/bert-large-phase1-preview/train.sbatch.sh"
)
COMPILE_SBATCH = (
    "sbatch --parsable --exclusive --no-requeue --nodes=16 --job-name=trainrun-bert-large-phase1-preview-compile "
    "--output=/fsx/trainrun/bert-large-phase1-preview/logs/compile.out --open-mode=append "
    "/fsx/trainrun/bert-large-phase1-preview/compile.sbatch.sh"
)
ACTIVATE = ". ~/aws_neuron_venv_pytorch/bin/activate && "
TRAIN_SRUN = f"srun --label bash -c '{ACTIVATE}./run_dp_bert_large_hf_pretrain_bf16_s128_lamb.sh'"
COMPILE_SRUN = (
    f"srun --label bash -c '{ACTIVATE}neuron_parallel_compile ./run_dp_bert_large_hf_pretrain_bf16_s128_lamb.sh'"
)


def bert_document() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(BERT.read_text())
    return document


def spec_of(document: dict[str, Any]) -> RunSpec:
    return parse_run_file(yaml.safe_dump(document, sort_keys=False))


@pytest.fixture(scope="module")
def bert() -> RunSpec:
    return parse_run_file(BERT.read_bytes())


@pytest.fixture(scope="module")
def bert_plan(bert: RunSpec) -> Plan:
    return build_plan(bert)


def fsx_per_hour(gib: int, deployment: str, throughput: int | None) -> float:
    return gib * PRICES.fsx_lustre_gb_month[(deployment, throughput)] / HOURS_PER_MONTH


def instance(instance_type: str) -> float:
    price = PRICES.instance(instance_type)
    assert price is not None, instance_type
    return price


def line_items(plan: Plan) -> list[str]:
    return [line.item for line in plan.cost.lines]


# --- cost ----------------------------------------------------------------------------------------


def test_bert_costs_sixteen_nodes_the_head_node_the_file_system_and_the_nat_gateway(bert_plan: Plan) -> None:
    expected = (
        16 * instance("trn1.32xlarge")
        + instance("c5.4xlarge")
        + fsx_per_hour(1200, "PERSISTENT_2", 250)
        + PRICES.nat_gateway_per_hour
    )
    cost = bert_plan.cost
    assert cost.per_hour == pytest.approx(expected, abs=1e-5)
    assert cost.partial is False
    assert cost.currency == "USD"
    assert cost.prices_as_of == PRICES.as_of
    compute, head, fsx, nat = cost.lines
    assert (compute.quantity, compute.unit_price_per_hour) == (16, instance("trn1.32xlarge"))
    assert compute.per_hour == pytest.approx(16 * instance("trn1.32xlarge"))
    assert (head.quantity, head.unit_price_per_hour) == (1, instance("c5.4xlarge"))
    assert fsx.quantity == 1200
    assert fsx.per_hour == pytest.approx(fsx_per_hour(1200, "PERSISTENT_2", 250), abs=1e-6)
    assert nat.per_hour == PRICES.nat_gateway_per_hour
    # The lines add up to the total.
    assert sum(line.per_hour or 0 for line in cost.lines) == pytest.approx(cost.per_hour, abs=1e-5)


def test_for_max_runtime_is_per_hour_times_the_hours_of_max_runtime(bert_plan: Plan) -> None:
    assert bert_plan.cost.max_runtime == "24h"
    assert bert_plan.cost.max_runtime_hours == 24
    assert bert_plan.cost.for_max_runtime == pytest.approx(bert_plan.cost.per_hour * 24, abs=1e-4)

    document = bert_document()
    document["workload"]["max_runtime"] = "90m"
    plan = build_plan(spec_of(document))
    assert plan.cost.max_runtime_hours == 1.5
    assert plan.cost.for_max_runtime == pytest.approx(plan.cost.per_hour * 1.5, abs=1e-4)


def test_the_notes_name_the_price_date_region_assumption_and_what_is_left_out(bert_plan: Plan) -> None:
    notes = " ".join(bert_plan.cost.notes)
    assert PRICES.as_of.isoformat() in notes
    assert "us-east-1/us-west-2" in notes
    assert "billed at the on-demand rate" in notes and "whether instances run in it or not" in notes
    assert "NAT gateway data processing" in notes and "not included" in notes


def test_an_unchecked_plan_says_its_capacity_was_not_checked(bert_plan: Plan) -> None:
    assert bert_plan.capacity_check is None
    assert "Capacity: not checked against an account (`trainrun plan --check` does" in render_text(bert_plan)


def test_a_checked_plan_shows_the_verdict_and_every_finding(bert_plan: Plan) -> None:
    from datetime import UTC, datetime

    from trainrun.model.findings import Code, Finding
    from trainrun.ops.plan import CapacityCheck

    check = CapacityCheck(
        region="us-west-2",
        checked_at=datetime(2026, 11, 21, 9, 30, tzinfo=UTC),
        accepted=False,
        findings=[Finding(code=Code.INSUFFICIENT_CAPACITY, severity="ERROR", message="12 of 16 available")],
    )
    text = render_text(bert_plan.model_copy(update={"capacity_check": check}))
    assert (
        "Capacity check (us-west-2, 2026-11-21 09:30 UTC): REJECTED: the run would end before creating anything" in text
    )
    assert "  ERROR   INSUFFICIENT_CAPACITY: 12 of 16 available" in text


def test_a_reused_network_and_file_system_are_listed_as_reused_and_cost_no_nat_or_fsx() -> None:
    document = bert_document()
    document["network"] = {
        "vpc_id": "vpc-0123456789abcdef0",
        "public_subnet_id": "subnet-0123456789abcdef0",
        "private_subnet_id": "subnet-0fedcba9876543210",
    }
    document["storage"] = {"fsx": {"file_system_id": "fs-0123456789abcdef0"}}
    plan = build_plan(spec_of(document))

    reused = {resource.kind: resource.detail for resource in plan.resources if resource.action == "reuse"}
    assert "vpc-0123456789abcdef0" in reused["network"]
    assert "fs-0123456789abcdef0" in reused["file-system"]
    created = [resource.kind for resource in plan.resources if resource.action == "create"]
    # The run's own EFA security group is the one thing created in a reused VPC.
    assert created == ["security-group", "cluster", "log-group"]

    assert not any("NAT" in item or "FSx" in item for item in line_items(plan))
    assert plan.cost.per_hour == pytest.approx(16 * instance("trn1.32xlarge") + instance("c5.4xlarge"), abs=1e-5)
    notes = " ".join(plan.cost.notes)
    assert "reused file system fs-0123456789abcdef0 is not counted" in notes
    assert "NAT gateway data processing" not in notes


def test_an_unpriced_head_node_makes_the_estimate_partial() -> None:
    document = bert_document()
    document["cluster"]["head_node_instance_type"] = "x2idn.16xlarge"
    plan = build_plan(spec_of(document))

    cost = plan.cost
    assert cost.partial is True
    head = cost.lines[1]
    assert "no price for x2idn.16xlarge" in head.item
    assert head.unit_price_per_hour is None and head.per_hour is None
    expected = 16 * instance("trn1.32xlarge") + fsx_per_hour(1200, "PERSISTENT_2", 250) + PRICES.nat_gateway_per_hour
    assert cost.per_hour == pytest.approx(expected, abs=1e-5)
    assert any(note.startswith("Partial:") and "x2idn.16xlarge" in note for note in cost.notes)
    text = render_text(plan)
    assert "no price for x2idn.16xlarge" in text
    assert "total per hour (partial)" in text


def test_an_unpriced_compute_type_is_not_an_error() -> None:
    without_trn2 = {k: v for k, v in PRICES.instance_per_hour.items() if k != "trn2.48xlarge"}
    prices = dataclasses.replace(PRICES, instance_per_hour=without_trn2)
    document = bert_document()
    document["capacity"]["instance_type"] = "trn2.48xlarge"
    plan = build_plan(spec_of(document), prices=prices)
    assert plan.cost.partial is True
    assert "no price for trn2.48xlarge" in plan.cost.lines[0].item
    assert plan.cost.per_hour == pytest.approx(
        instance("c5.4xlarge") + fsx_per_hour(1200, "PERSISTENT_2", 250) + PRICES.nat_gateway_per_hour, abs=1e-5
    )


@pytest.mark.parametrize(
    ("fsx", "deployment", "throughput"),
    [
        ({"deployment_type": "SCRATCH_2", "storage_capacity_gib": 2400}, "SCRATCH_2", None),
        ({"deployment_type": "PERSISTENT_1", "storage_capacity_gib": 4800}, "PERSISTENT_1", 100),
        ({"deployment_type": "PERSISTENT_2", "throughput_per_tib": 1000}, "PERSISTENT_2", 1000),
        ({}, "PERSISTENT_2", 250),
    ],
)
def test_the_file_system_is_priced_by_deployment_type_and_throughput_tier(
    fsx: dict[str, Any], deployment: str, throughput: int | None
) -> None:
    document = bert_document()
    document["storage"] = {"fsx": fsx}
    plan = build_plan(spec_of(document))
    (line,) = [line for line in plan.cost.lines if line.item.startswith("FSx")]
    gib = fsx.get("storage_capacity_gib", 1200)
    assert line.quantity == gib
    assert line.per_hour == pytest.approx(fsx_per_hour(gib, deployment, throughput), abs=1e-6)


def test_the_price_table_covers_every_compute_type_and_file_system_a_run_file_accepts() -> None:
    for instance_type in TRAINIUM_INSTANCE_TYPES:
        assert PRICES.instance(instance_type) is not None, instance_type
    assert PRICES.instance(Cluster().head_node_instance_type) is not None
    for deployment in ("SCRATCH_1", "SCRATCH_2"):
        assert PRICES.fsx_lustre_per_gib_hour(deployment, None) is not None
    for deployment, tiers in FSX_THROUGHPUT_PER_TIB.items():
        for tier in tiers:
            assert PRICES.fsx_lustre_per_gib_hour(deployment, tier) is not None, (deployment, tier)
    assert isinstance(PRICES, PriceTable)
    assert PRICES.as_of.isoformat() in PRICES.source
    assert PRICES.instance("no.such-type") is None


def test_teardown_that_keeps_things_says_they_go_on_billing() -> None:
    document = bert_document()
    document["teardown"] = {"on_success": "keep", "on_failure": "delete", "keep_file_system": True}
    plan = build_plan(spec_of(document))
    notes = " ".join(plan.cost.notes)
    assert "keep_file_system" in notes
    assert "teardown keeps everything on success" in notes
    (file_system,) = [resource for resource in plan.resources if resource.kind == "file-system"]
    assert "kept after the run" in file_system.detail


# --- resources -----------------------------------------------------------------------------------


def test_a_new_network_lists_every_piece_create_network_makes(bert_plan: Plan) -> None:
    # (but the EKS control plane's second subnet, which only an EKS run's network has)
    pieces = [component for component in COMPONENTS if component != "control-plane-subnet"]
    kinds = [resource.kind for resource in bert_plan.resources]
    assert kinds[: len(pieces)] == pieces
    details = {resource.kind: resource.detail for resource in bert_plan.resources}
    assert details["vpc"].startswith("10.0.0.0/16")
    assert details["public-subnet"].startswith("10.0.0.0/17 in us-west-2d")
    assert details["private-subnet"].startswith("10.0.128.0/17 in us-west-2d")
    assert all(resource.action == "create" for resource in bert_plan.resources)


def test_bert_lists_the_file_system_its_data_repository_association_and_the_cluster(bert_plan: Plan) -> None:
    details = {resource.kind: resource.detail for resource in bert_plan.resources}
    assert "PERSISTENT_2, 1200 GiB SSD, 250 MB/s/TiB" in details["file-system"]
    assert details["data-repository-association"].startswith("s3://my-trainrun-data/bert-large-phase1/ linked at")
    cluster = details["cluster"]
    assert "head node c5.4xlarge" in cluster
    assert "16 x trn1.32xlarge" in cluster
    assert "capacity reservation cr-0123456789abcdef0" in cluster


def test_no_data_repository_no_association() -> None:
    document = bert_document()
    del document["storage"]["fsx"]["data_repository"]
    plan = build_plan(spec_of(document))
    assert "data-repository-association" not in [resource.kind for resource in plan.resources]


def test_the_cluster_config_is_the_one_cluster_config_prints(bert: RunSpec, bert_plan: Plan) -> None:
    expected = render_cluster_config(
        bert, ClusterIds.placeholders(bert), tags=run_tags(RUN_ID, "trainrun"), run_id=RUN_ID
    )
    assert bert_plan.cluster_config == expected


def test_a_bad_neuron_install_script_is_a_value_error(bert: RunSpec) -> None:
    with pytest.raises(ValueError, match="neuron_install_script_uri"):
        build_plan(bert, neuron_install_script_uri="ftp://example.com/x.sh")


# --- head-node commands --------------------------------------------------------------------------


def test_the_commands_are_the_exact_scripts_the_control_plane_sends(bert: RunSpec, bert_plan: Plan) -> None:
    prepare, compile_, train = bert_plan.head_node_commands
    assert (prepare.state, compile_.state, train.state) == (State.PREPARE_HEAD_NODE, State.COMPILE, State.TRAIN)
    assert prepare.script == prepare_script(bert, RUN_ID, jobs_log_group="/trainrun/<stack>/jobs", region="us-west-2")
    assert compile_.script == submit_script(
        bert,
        RUN_ID,
        "compile",
        end_key=PLAN_END_KEY,
        config_bucket=PREVIEW_CONFIG_BUCKET,
        chained_end_key=PLAN_END_KEY,
    )
    assert train.script == submit_script(
        bert, RUN_ID, "train", end_key=PLAN_END_KEY, config_bucket=PREVIEW_CONFIG_BUCKET
    )
    assert train.wrapper_script == wrapper_script(bert, RUN_ID, "train", config_bucket=PREVIEW_CONFIG_BUCKET)


def test_the_job_commands_hold_the_exact_sbatch_and_srun_lines(bert_plan: Plan) -> None:
    _, compile_, train = bert_plan.head_node_commands
    # The scripts hold each command as a bash array of its arguments: the same words.
    assert f"\nsbatch_command=({TRAIN_SBATCH})\n" in train.script
    assert train.wrapper_script is not None and f"\nsrun_command=({TRAIN_SRUN})\n" in train.wrapper_script
    assert train.key_lines == [TRAIN_SBATCH, TRAIN_SRUN]
    assert f"\nsbatch_command=({COMPILE_SBATCH})\n" in compile_.script
    assert compile_.key_lines == [COMPILE_SBATCH, COMPILE_SRUN]


def test_a_resumable_run_shows_what_a_resubmission_runs() -> None:
    document = bert_document()
    document["workload"]["resume"] = "./run_dp_bert_large_hf_pretrain_bf16_s128_lamb.sh --resume_ckpt"
    _, _, train = build_plan(spec_of(document)).head_node_commands
    assert train.key_lines == [
        TRAIN_SBATCH,
        TRAIN_SRUN,
        "# after an infrastructure failure, up to 2 resubmissions, each a new Slurm job (TRAINRUN_ATTEMPT=2, 3, ...):",
        "srun --label bash -c './run_dp_bert_large_hf_pretrain_bf16_s128_lamb.sh --resume_ckpt'",
    ]


def test_the_prepare_key_lines_are_the_fetch_setup_and_dataset_commands(bert_plan: Plan) -> None:
    lines = bert_plan.head_node_commands[0].key_lines
    assert lines[0] == "runuser -l ubuntu -c 'bash -s' <<'TRAINRUN_EOF'"
    assert lines[1].startswith("git clone --branch master -- https://github.com/aws-neuron/aws-neuron-samples.git ")
    assert lines[2] == (
        f"bash -lc '{ACTIVATE}python3 -m pip install -r requirements.txt && "
        "ln -sfn /fsx/examples_datasets ~/examples_datasets'"
    )
    assert lines[3].startswith("aws s3 cp s3://my-trainrun-data/datasets/")


def test_a_multi_line_setup_is_one_key_line() -> None:
    document = bert_document()
    document["workload"]["setup"] = "git clone https://example.com/extra.git\npython3 -m pip install ./extra"
    plan = build_plan(spec_of(document))
    lines = plan.head_node_commands[0].key_lines
    assert "bash -lc 'git clone https://example.com/extra.git\npython3 -m pip install ./extra'" in lines
    assert not any(line.startswith("git clone https://example.com") for line in lines)


def test_without_compile_there_is_no_compile_submit_script() -> None:
    document = bert_document()
    del document["workload"]["compile"]
    plan = build_plan(spec_of(document))
    assert [command.state for command in plan.head_node_commands] == [State.PREPARE_HEAD_NODE, State.TRAIN]
    assert all("compile.sbatch.sh" not in command.script for command in plan.head_node_commands)
    assert "the compile job has the same limit" not in " ".join(plan.cost.notes)


def test_a_run_file_without_a_region_shows_the_default_region_as_assumed() -> None:
    document = bert_document()
    del document["region"]
    del document["capacity"]["availability_zone"]
    plan = build_plan(spec_of(document))
    assert (plan.region, plan.region_assumed) == ("us-west-2", True)
    assert "\naws_region=us-west-2\n" in plan.head_node_commands[0].script
    assert "us-west-2 (assumed" in render_text(plan)
    subnets = [resource.detail for resource in plan.resources if resource.kind.endswith("-subnet")]
    assert len(subnets) == 2 and all("in the reservation's zone" in detail for detail in subnets)


def test_a_reservation_group_gives_its_region() -> None:
    document = bert_document()
    del document["region"]
    del document["capacity"]["availability_zone"]
    del document["capacity"]["reservation_id"]
    document["capacity"]["reservation_group_arn"] = "arn:aws:resource-groups:us-east-1:123456789012:group/trn"
    plan = build_plan(spec_of(document))
    assert (plan.region, plan.region_assumed) == ("us-east-1", False)
    assert "\naws_region=us-east-1\n" in plan.head_node_commands[0].script


# --- output --------------------------------------------------------------------------------------


def test_the_json_document_has_the_documented_keys(bert_plan: Plan) -> None:
    document = json.loads(bert_plan.model_dump_json())
    assert {
        "name",
        "nodes",
        "instance_type",
        "region",
        "resources",
        "cluster_config",
        "head_node_commands",
        "cost",
    } <= set(document)
    assert document["name"] == "bert-large-phase1"
    assert (document["nodes"], document["instance_type"]) == (16, "trn1.32xlarge")
    assert {"kind", "detail"} <= set(document["resources"][0])
    cost = document["cost"]
    assert {
        "currency",
        "prices_as_of",
        "per_hour",
        "for_max_runtime",
        "max_runtime",
        "lines",
        "partial",
        "notes",
    } <= set(cost)
    assert isinstance(cost["per_hour"], float) and isinstance(cost["for_max_runtime"], float)
    assert cost["prices_as_of"] == PRICES.as_of.isoformat()
    assert {"item", "quantity", "unit_price_per_hour", "per_hour"} <= set(cost["lines"][0])


def test_the_text_shows_resources_key_command_lines_and_the_totals(bert_plan: Plan) -> None:
    text = render_text(bert_plan)
    assert "16 x trn1.32xlarge in us-west-2" in text
    assert "data-repository-association" in text
    assert TRAIN_SBATCH in text and TRAIN_SRUN in text and COMPILE_SRUN in text
    assert "The full scripts are in --json" in text
    assert PRICES.as_of.isoformat() in text
    assert f"${bert_plan.cost.per_hour:,.2f}" in text
    assert f"${bert_plan.cost.for_max_runtime:,.2f}" in text
    # A summary, not the scripts: far shorter than them (the timeline's chart is a line a bar).
    assert len(text.splitlines()) < 110
    assert "TRAINRUN-SUBMITTED" not in text


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "-"),
        (0.0, "$0.00"),
        (21.5, "$21.50"),
        (8281.68, "$8,281.68"),
        (0.68, "$0.68"),
        (0.230137, "$0.23"),
        (0.045, "$0.045"),
        (0.345205, "$0.345"),
        (0.000287671, "$0.00029"),
        (0.0000191781, "$0.000019"),
    ],
)
def test_money_is_dollars_and_cents_and_small_amounts_keep_two_significant_digits(
    value: float | None, shown: str
) -> None:
    assert money(value) == shown
