"""The live, replay and sessions screens."""
