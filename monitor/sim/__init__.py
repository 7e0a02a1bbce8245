"""The demo and simulations: local brokers (Tansu, Apache Kafka), scored workload, audit team."""
