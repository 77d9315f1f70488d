"""The runtime: the pipeline, serving, workers, generations, reload, admin and health."""
