"""StepStats: engine-core time per step and peak COLD usage, counted by the GraniKV
scheduler in its own process and read through the ``stats`` control call."""

from __future__ import annotations


class StepStats:
    """Engine-core time per step and peak COLD usage, in the scheduler's own process."""

    def __init__(self, track: bool = False) -> None:
        self.track = track  # also check slots == tokens every step (O(running))
        self.steps = 0
        self.schedule_s = 0.0
        self.update_s = 0.0
        self.peak_cold_used = 0
        # slots in use minus tokens that need them, over steps: above 0 is waste (slots
        # beyond the tokens); below 0 is sharing (prefix-cache hits on COLD blocks)
        self.max_over = 0
        self.max_shared = 0

    def scheduled(self, dt: float, cold_used: int, over: int = 0) -> None:
        self.steps += 1
        self.schedule_s += dt
        self.peak_cold_used = max(self.peak_cold_used, cold_used)
        self.max_over = max(self.max_over, over)
        self.max_shared = max(self.max_shared, -over)

    def updated(self, dt: float) -> None:
        self.update_s += dt

    def snapshot(self) -> dict[str, float]:
        return {"steps": self.steps, "schedule_s": self.schedule_s, "update_s": self.update_s,
                "peak_cold_used": self.peak_cold_used, "max_over": self.max_over,
                "max_shared": self.max_shared}
