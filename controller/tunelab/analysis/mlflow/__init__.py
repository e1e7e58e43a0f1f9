"""MLflow export as a library: what each run holds (``plan``) and the one writer that talks to
MLflow (``sink``). The controller's automatic exporter (``tunelab.controller.mlflow``) and
``tunelab export mlflow`` both use it."""
