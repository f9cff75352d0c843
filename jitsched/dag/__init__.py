"""The job model and its timing: DAG validation and compilation to arrays, and the LAT pass over them."""
