"""The saga engine: routes events to flows and commits each step in one window."""
