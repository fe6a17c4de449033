"""Fault tests of issue 12 (reliability): real Ray, real envs, injections from tdscheme.testing."""
