"""Workloads: the paper's model DAGs and job streams, synthetic jobs, and the TensorFlow graph importer."""
