"""TerminalHorizon-style long-horizon task synthesis (recipe.md): stage 1 builds executable task
environments from professional workflows and audits what the environment already did for the agent;
stage 2 extends accepted tasks into parent -> child chains; `collect` turns teacher episodes on them
into SFT records. It sits above agents/ (it runs episodes) and tasks/ (it writes tasks)."""
