"""specviz.cost_curve on a tiny random model: one point per K and per batch size, the cache left as it was."""
from specviz.cost_curve import measure_batch, measure_cost_curve, measure_positions


def test_points_for_every_k_and_batch(tiny_target):
    points = list(measure_cost_curve(tiny_target, positions=(1, 2, 4), batch_sizes=(1, 3), repeats=2))
    assert [(p.axis, p.x) for p in points] == [("positions", 1), ("positions", 2), ("positions", 4),
                                               ("batch", 1), ("batch", 3)]
    assert all(p.ms > 0 for p in points)


def test_positions_roll_the_cache_back(tiny_target, monkeypatch):
    from specviz import runner

    lengths = []
    original = runner.CausalRunner.rollback

    def spy(self, length):
        original(self, length)
        lengths.append(self.length)

    monkeypatch.setattr(runner.CausalRunner, "rollback", spy)
    points = list(measure_positions(tiny_target, positions=(2, 5), context=16, repeats=2))
    assert [p.context for p in points] == [16, 16] and set(lengths) == {16}


def test_batch_points_time_one_new_position(tiny_target):
    (point,) = measure_batch(tiny_target, batch_sizes=(4,), context=8, repeats=1)
    assert point.axis == "batch" and point.x == 4 and point.context == 8 and point.ms > 0
