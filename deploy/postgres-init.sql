-- A second database for the MLflow tracking server (the first, POSTGRES_DB, holds the service state).
CREATE DATABASE mlflow;
