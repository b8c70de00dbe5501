"""Two runs side by side (`trainserve diff`): the changes beyond the noise, the CI gate, their charts and tables."""
