#!/usr/bin/env bash
# Spark 4 needs Java 17 or newer; fail early with the fix instead of a JVM stack trace later.
set -u
fix="Install a JDK 17+ (Debian/Ubuntu: 'apt-get install openjdk-17-jre-headless'; macOS: 'brew install openjdk@17') or point JAVA_HOME at one."
java_bin="java"
if [ -n "${JAVA_HOME:-}" ] && [ -x "${JAVA_HOME}/bin/java" ]; then java_bin="${JAVA_HOME}/bin/java"; fi
if ! command -v "$java_bin" >/dev/null 2>&1; then
  echo "error: Java was not found; Spark needs Java 17 or newer. $fix" >&2
  exit 1
fi
version_line=$("$java_bin" -version 2>&1 | head -n 1)
major=$(printf '%s' "$version_line" | sed -E 's/.*version "([0-9]+)(\.([0-9]+))?.*/\1/')
if [ "$major" = "1" ]; then major=$(printf '%s' "$version_line" | sed -E 's/.*version "1\.([0-9]+).*/\1/'); fi
case "$major" in
  ''|*[!0-9]*) echo "error: could not read the Java version from: $version_line. $fix" >&2; exit 1 ;;
esac
if [ "$major" -lt 17 ]; then
  echo "error: Java $major found ($version_line); Spark needs Java 17 or newer. $fix" >&2
  exit 1
fi
