"""Time-unit factors, in one place: every time in a trace is integer nanoseconds."""

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
MS_PER_S = 1_000
