#!/bin/bash
greet > /app/greeting.txt
