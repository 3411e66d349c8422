"""What every service process runs on: its vitals (loops, health), the service runner, metrics and
logging."""
