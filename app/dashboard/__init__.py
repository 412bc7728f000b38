"""The web dashboard: server-rendered pages with Plotly charts on top of the API's services."""
