"""What every section of the report shares: the typed sections summary.json is written from (the whole tree, so
one schema), the sentences built from them, units, statistics, prices, record collection and the figure canvas.
Nothing here imports a section."""
