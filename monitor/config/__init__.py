"""Configuration: the schema (``schema``), loading it from YAML (``load``), and validation.

``validate`` holds the general machinery, ``kafka_client`` the Kafka client settings.
"""
