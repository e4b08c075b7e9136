"""specviz.cost_curve on a tiny random model: one point per K and per batch size, the cache left as it was."""
from specviz.cost_curve import measure_batch, measure_cost_curve, measure_positions


def test_points_for_every_k_and_batch(tiny_target):
    points = list(measure_cost_curve(tiny_target, positions=(1, 2, 4), batch_sizes=(1, 3), repeats=2))
    assert [(p.axis, p.x) for p in points] == [("positions", 1), ("positions", 2), ("positions", 4),
                                               ("batch", 1), ("batch", 3)]
    assert all(p.ms > 0 for p in points)


def test_positions_use_the_engines_runner_and_give_it_back(tiny_target, monkeypatch):
    from specviz import cost_curve

    made = []
    real = cost_curve.make_runner
    monkeypatch.setattr(cost_curve, "make_runner", lambda model: made.append(real(model)) or made[-1])
    points = list(measure_positions(tiny_target, positions=(2, 5), context=16, repeats=2))
    assert [(p.x, p.context) for p in points] == [(2, 16), (5, 16)] and all(p.ms > 0 for p in points)
    assert len(made) == 1  # one runner for the whole curve
    if hasattr(made[0], "workspace"):
        assert made[0].workspace is None  # released: its cache is back in the model's pool


def test_batch_points_time_one_new_position(tiny_target):
    (point,) = measure_batch(tiny_target, batch_sizes=(4,), context=8, repeats=1)
    assert point.axis == "batch" and point.x == 4 and point.context == 8 and point.ms > 0
