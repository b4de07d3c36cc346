"""Clouds: the provider interface and the simulated cloud whose hosts are local agents."""
