"""specviz.measure.cost_curve on a tiny random model: one point per K and per batch size, the cache left as it was."""
from specviz.measure.cost_curve import measure_batch, measure_cost_curve, measure_positions


def first_pass(points, axis, widths):
    """An axis's points before any measured again (a tiny model's times are noise-sized, so a pair may look
    implausible and come again, as the module's doc says); those after must be of the widths measured."""
    mine = [p for p in points if p.axis == axis]
    first, again = mine[:len(widths)], mine[len(widths):]
    assert [p.x for p in first] == list(widths) and {p.x for p in again} <= set(widths)
    return first


def test_points_for_every_k_and_batch(tiny_target):
    points = list(measure_cost_curve(tiny_target, positions=(1, 2, 4), batch_sizes=(1, 3), repeats=2))
    assert {p.axis for p in points} == {"positions", "batch"}
    first_pass(points, "positions", (1, 2, 4))
    first_pass(points, "batch", (1, 3))
    assert all(p.ms > 0 for p in points)


def test_positions_use_the_engines_runner_and_give_it_back(tiny_target, monkeypatch):
    from specviz.measure import cost_curve

    made = []
    real = cost_curve.make_runner
    monkeypatch.setattr(cost_curve, "make_runner", lambda model: made.append(real(model)) or made[-1])
    points = list(measure_positions(tiny_target, positions=(2, 5), context=16, repeats=2))
    first = first_pass(points, "positions", (2, 5))
    assert all(p.context == 16 for p in first) and all(p.ms > 0 for p in points)
    assert len(made) == 1  # one runner for the whole curve
    if hasattr(made[0], "workspace"):
        assert made[0].workspace is None  # released: its cache is back in the model's pool


def test_batch_points_time_one_new_position(tiny_target):
    (point,) = measure_batch(tiny_target, batch_sizes=(4,), context=8, repeats=1)
    assert point.axis == "batch" and point.x == 4 and point.context == 8 and point.ms > 0


def test_a_pair_measured_implausibly_is_measured_again(tiny_target, monkeypatch):
    """A busy moment slows K = 1 once: K = 2 then measures cheaper, which it cannot be; both are measured again
    and the curve a caller keeps is the plausible one."""
    from specviz.measure import cost_curve
    from specviz.measure.plausibility import wider_cheaper

    calls = []

    def timed(model, positions, context, repeats, runner):  # 10 ms a position, 5x that on K = 1's first timing
        (k,) = positions
        calls.append(k)
        return {k: 10.0 * k * (5 if calls == [1] else 1)}

    monkeypatch.setattr(cost_curve, "fast_cost_curve", timed)
    points = list(measure_positions(tiny_target, positions=(1, 2, 4), context=8, repeats=1))
    assert [p.x for p in points] == [1, 2, 4, 1, 2]  # the slowed pair, again
    kept = cost_curve.latest_points(points)
    assert [(p.x, p.ms) for p in kept] == [(1, 10.0), (2, 20.0), (4, 40.0)]
    assert wider_cheaper([(p.x, p.ms) for p in points[:3]]) == (1,
                                                                2) and wider_cheaper([(p.x, p.ms)
                                                                                      for p in kept]) is None


def test_a_plausible_curve_is_measured_once(tiny_target, monkeypatch):
    from specviz.measure import cost_curve

    monkeypatch.setattr(cost_curve, "fast_cost_curve", lambda model, positions, context, repeats, runner:
                        {positions[0]: 10.0 + positions[0]})
    assert [p.x for p in measure_positions(tiny_target, positions=(1, 2, 4), context=8, repeats=1)] == [1, 2, 4]


def test_a_cache_repeated_over_rows_is_a_prefill_of_those_rows(tiny_target):
    """A batch point prefills one row and repeats its cache (cost_curve._batch_ms): the keys and values are a
    prefill of the same tokens in every row, and a forward on it gives every row the same logits as one row."""
    import torch

    from specviz.runners.causal import _cache_keyword, layer_keys_values, new_cache, repeat_rows

    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    keyword = _cache_keyword(tiny_target.model)
    with torch.inference_mode():
        one, three = new_cache(), new_cache()
        tiny_target.model(input_ids=ids, use_cache=True, **{keyword: one})
        tiny_target.model(input_ids=ids.expand(3, -1), use_cache=True, **{keyword: three})
        repeat_rows(one, 3)
        for (k, v), (k3, v3) in zip(layer_keys_values(one), layer_keys_values(three)):
            assert k.shape == k3.shape and torch.allclose(k, k3, atol=1e-5) and torch.allclose(v, v3, atol=1e-5)
        positions = torch.full((3, 1), ids.shape[1])
        logits = tiny_target.model(input_ids=torch.tensor([[7], [7], [7]]), position_ids=positions, use_cache=True,
                                   **{keyword: one}).logits
    assert torch.allclose(logits[0], logits[1]) and torch.allclose(logits[0], logits[2])
