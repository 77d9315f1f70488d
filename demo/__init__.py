"""The mend demo: a legacy "orders" API that fails like real ones, and a scripted agent.

``python -m demo.run`` starts both, puts mend between them, and shows how much more of the agent's
work gets done when every error arrives as one envelope that says what to do next.
"""
