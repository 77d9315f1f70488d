"""The runtime: the pipeline, serving, workers, settings, generations, reload, admin and health."""
