"""The controller's automatic MLflow export (``export``); the plan and the writer it uses are the
library ``tunelab.analysis.mlflow``."""
