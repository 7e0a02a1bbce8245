"""The demo and simulations: embedded broker, scored workload, simulated audit team."""
