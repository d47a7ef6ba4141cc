"""Alert delivery: cw.alerts.v1 -> webhooks (generic, Slack, Feishu) and Alertmanager."""
