"""The AWS clock's table (trainrun.logic.aws_clock): every figure has a source, sizes only add time."""

from __future__ import annotations

import pytest

from trainrun.logic import aws_clock
from trainrun.logic.aws_clock import Duration
from trainrun.project_files import project_root


def test_every_fixed_duration_names_its_source_and_is_positive() -> None:
    # Given the table of fixed durations
    # Then each one is a positive number of seconds with a non-empty source
    assert aws_clock.TABLE, "the table is empty"
    for name, duration in aws_clock.TABLE.items():
        assert duration.seconds > 0, name
        assert duration.source.strip(), name


def test_an_estimate_says_so_in_its_source() -> None:
    assert aws_clock.NAT_GATEWAY_AVAILABLE.estimate
    assert not aws_clock.CLUSTERMGTD_LOOP.estimate


def test_a_duration_without_a_source_is_refused() -> None:
    with pytest.raises(ValueError, match="source"):
        Duration(10, " ")


@pytest.mark.parametrize("deployment", ["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"])
def test_a_larger_file_system_takes_no_less_time_to_create(deployment: str) -> None:
    sizes = [1200, 2400, 4800, 9600, 48000]
    seconds = [aws_clock.fsx_created(deployment, size).seconds for size in sizes]
    assert seconds == sorted(seconds)
    assert seconds[-1] > seconds[0]


def test_a_persistent_file_system_takes_longer_than_a_scratch_one() -> None:
    assert aws_clock.fsx_created("PERSISTENT_2", 1200).seconds > aws_clock.fsx_created("SCRATCH_2", 1200).seconds


def test_an_unknown_deployment_type_is_named_in_the_error() -> None:
    with pytest.raises(ValueError, match="PERSISTENT_3"):
        aws_clock.fsx_created("PERSISTENT_3", 1200)


def test_file_system_throughput_is_storage_times_throughput_per_tib() -> None:
    # 2.4 TiB at 250 MB/s/TiB: AWS's own example shape (storage x per-unit throughput)
    assert aws_clock.fsx_throughput_mb_s(2457.6, 250) == pytest.approx(600)


def test_copy_time_is_bytes_over_throughput_and_grows_with_size() -> None:
    assert aws_clock.copy(48 * 10**9, 150).seconds == pytest.approx(320)
    sizes = [0, 10**9, 10**10, 10**11]
    seconds = [aws_clock.copy(size, 150).seconds for size in sizes]
    assert seconds == sorted(seconds)


def test_a_dataset_copies_faster_to_a_larger_file_system() -> None:
    small = aws_clock.dataset_copy(48 * 10**9, 1200, 125).seconds
    large = aws_clock.dataset_copy(48 * 10**9, 4800, 125).seconds
    assert large < small


def test_cluster_creation_waits_for_the_compute_nodes_after_the_custom_action() -> None:
    head_only = aws_clock.cluster_created(0).seconds
    with_nodes = aws_clock.cluster_created(16).seconds
    assert with_nodes == head_only + sum(
        d.seconds for d in (aws_clock.CLUSTERMGTD_LOOP, aws_clock.COMPUTE_NODE_BOOT, aws_clock.STATIC_FLEET_POLL)
    )
    assert aws_clock.cluster_created(1).seconds <= with_nodes


def test_a_scaled_duration_keeps_its_source() -> None:
    scaled = aws_clock.FSX_DELETED.scaled(30)
    assert scaled.seconds == pytest.approx(10)
    assert scaled.source == aws_clock.FSX_DELETED.source


def test_the_architecture_doc_shows_the_table_as_the_module_has_it() -> None:
    # Given the table, as docs/architecture.md#the-aws-clock shows it (generated from the module)
    doc = (project_root() / "docs" / "architecture.md").read_text()
    # Then every figure and source there is the module's: a change to one must change the other
    assert aws_clock.table_markdown() in doc, (
        "regenerate the table: python -c 'from trainrun.logic.aws_clock import table_markdown; print(table_markdown())'"
    )
    assert "## The AWS clock" in doc
