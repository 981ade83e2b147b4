"""Code generated from protos/liftbridge/api.proto by protos/generate.sh; do not edit."""
