"""How `trainrun logs` merges the ranks' copies of a line (trainrun.ops.logs.RankMerger)."""

from __future__ import annotations

from trainrun.model.end_marker import end_marker
from trainrun.ops.logs import MERGE_WINDOW, RankMerger, ShownLine


def shown(merger: RankMerger, lines: list[str]) -> list[ShownLine]:
    return [line for raw in lines for line in merger.feed(raw)] + merger.flush()


def test_a_line_every_rank_printed_is_shown_once_as_all_ranks_in_first_copy_order() -> None:
    merger = RankMerger(ranks=3)
    result = shown(merger, ["1: a", "0: a", "0: b", "2: a", "1: b", "2: b"])
    assert [(line.text, line.every_rank) for line in result] == [("a", True), ("b", True)]


def test_a_line_some_ranks_printed_is_shown_with_those_ranks() -> None:
    merger = RankMerger(ranks=4)
    (line,) = shown(merger, ["3: x", "1: x"])
    assert line.prefix(single_node=False) == "(ranks 1,3) "


def test_a_rank_printing_the_same_line_twice_is_two_lines() -> None:
    merger = RankMerger(ranks=2)
    result = shown(merger, ["0: saving", "0: saving", "1: saving", "1: saving"])
    assert [line.prefix(single_node=False) + line.text for line in result] == ["(all ranks) saving"] * 2


def test_a_line_only_one_rank_prints_is_shown_once_the_window_has_passed_it() -> None:
    merger = RankMerger(ranks=2)
    first = merger.feed("0: only rank 0")
    later = [line for n in range(MERGE_WINDOW) for line in merger.feed(f"0: line {n}")]
    assert first == [] and later[0] == ShownLine("only rank 0", (0,))


def test_the_end_marker_is_hidden_and_a_line_of_no_rank_is_shown_as_it_is() -> None:
    marker = end_marker(
        "0" * 64, run_id="r-0123456789ab", job="train", slurm_job_id=7, exit_code=0, state="COMPLETED", ended_at=1
    )
    merger = RankMerger(ranks=2)
    result = shown(merger, [marker, "srun: error: Node failure on queue1-st-trn1-2"])
    assert result == [ShownLine("srun: error: Node failure on queue1-st-trn1-2", None)]
    assert result[0].prefix(single_node=False) == ""
