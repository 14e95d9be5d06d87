"""The graph's pure rules: gates, normalisation, resolution, corroboration, supersession."""
