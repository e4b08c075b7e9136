"""What a run leaves behind: the engine-to-UI records (plain dataclasses), the run metrics, and the distance to
a perfect drafter."""
