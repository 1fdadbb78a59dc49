"""What a DAG run measures: variants, presets, machine sets, the trigger forms' params schemas, round
order, and each variant's command line."""
