"""Frames, rigs and references shared by the native engine's tests."""
