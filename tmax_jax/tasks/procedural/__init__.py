"""Offline procedural task library (see registry.py)."""
