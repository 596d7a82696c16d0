# nginx from Debian's package, for hosts that reach no image registry (`make deploy-test` builds
# it on its mmdebstrap base): docker-compose.yml's `nginx` service with NGINX_IMAGE set to it.
# Laid out as the official image is: the compose file mounts our config as conf.d/default.conf,
# the logs go to the container's stdout/stderr, nginx stays in the foreground.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
# Debian's default site also listens on :80 as the default server: it would answer instead of
# ours, so it goes.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx \
 && rm -rf /var/lib/apt/lists/* /etc/nginx/sites-enabled/default \
 && ln -sf /dev/stdout /var/log/nginx/access.log \
 && ln -sf /dev/stderr /var/log/nginx/error.log
EXPOSE 80
STOPSIGNAL SIGQUIT
CMD ["nginx", "-g", "daemon off;"]
