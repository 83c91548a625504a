"""Schedules' clock: the cron calendar and the scheduler that fires them, one leader at a time."""
