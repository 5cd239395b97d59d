"""What a run leaves on disk: the output folder, its tables and its plots.

| module | owns |
|---|---|
| `files.py` | one run's folder: parquet tables, summary.json, config.json, PNGs |
| `figures.py` | which figure file is drawn by which function from which table |
| `plots.py`, `compare_plots.py` | matplotlib PNGs of a run, a comparison, a sweep |
| `plot_worker.py` | a second process that imports matplotlib while the simulation runs |
| `notebooks.py` | executes the jupytext notebooks and renders them to HTML |
"""
