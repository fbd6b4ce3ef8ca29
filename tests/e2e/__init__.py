"""End-to-end tests against a real vLLM (CPU build); see conftest.py."""
