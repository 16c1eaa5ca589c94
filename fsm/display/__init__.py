"""How jobfsm shows things to people, shared by every surface (CLI, dashboard, demo).

- `format`: times, ages, stored text made safe to show, first lines, capped JSON
- `terminal`: rich tables and progress bars on a terminal
- `diagram`: the lifecycle drawn from the compiled spec (Mermaid, DOT, SVG, PNG)

The surfaces import these downward; nothing here imports a surface.
"""
