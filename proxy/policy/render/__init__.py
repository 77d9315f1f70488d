"""The renderings: negotiating what the agent accepts, and the envelope as JSON,
problem+json, prose and XML.

May import, in the policy floor: ``envelope`` (the model it renders), and the top module
``shorten``."""
