// Package deploy holds only tests: they check the deployment files (the
// Dockerfile, docker-compose.yml, deploy/kubernetes, the Prometheus alerts
// and the Grafana dashboard) against the quorate binary they run.
package deploy
