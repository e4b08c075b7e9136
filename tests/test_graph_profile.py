"""scripts.graph_profile: a trace's kernels grouped by the CUDA graph replay that launched them."""
from scripts.graph_profile import graph_replays, kinds_of_replay


def launch(name, ts, correlation):
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "ts": ts, "dur": 2, "args": {"correlation": correlation}}


def kernel(name, ts, dur, correlation):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {"correlation": correlation}}


def two_steps():
    """Two steps of a lookup graph (2 kernels) then a verify graph (3 kernels), and one kernel launched outside
    a graph."""
    events = []
    for step, base in enumerate((0, 100)):
        lookup, verify = 10 * step + 1, 10 * step + 2
        events += [launch("cudaGraphLaunch", base, lookup), kernel("draft_a", base + 5, 4, lookup),
                   kernel("draft_b", base + 12, 2, lookup),
                   launch("cudaGraphLaunch", base + 1, verify), kernel("gemm", base + 20, 30, verify),
                   kernel("norm", base + 52, 2, verify), kernel("argmax", base + 56, 1, verify)]
    events += [launch("cudaLaunchKernel", 300, 99), kernel("outside", 301, 50, 99)]
    return events


def test_kernels_are_grouped_by_the_graph_launch_that_ran_them_in_launch_order():
    replays = graph_replays(two_steps())
    assert [[k["name"] for k in r] for r in replays] == [["draft_a", "draft_b"], ["gemm", "norm", "argmax"]] * 2


def test_a_kernel_launched_outside_a_graph_is_left_out():
    assert all(k["name"] != "outside" for r in graph_replays(two_steps()) for k in r)
    control = [launch("cudaGraphLaunch", 300, 99), kernel("outside", 301, 50, 99)]
    assert [k["name"] for r in graph_replays(control) for k in r] == ["outside"]


def test_each_kind_of_replay_has_its_span_busy_time_and_gaps():
    kinds = {kind["kernels"]: kind for kind in kinds_of_replay(graph_replays(two_steps()))}
    lookup, verify = kinds[2], kinds[3]
    assert lookup["replays"] == verify["replays"] == 2
    assert (lookup["span_us"], lookup["busy_us"], lookup["gaps_us_per_kernel"]) == (9, 6, 3)
    assert (verify["span_us"], verify["busy_us"]) == (37, 33)
    assert verify["short_kernels"] == 2  # norm and argmax
    assert verify["top"][0] == ("gemm", 30)
