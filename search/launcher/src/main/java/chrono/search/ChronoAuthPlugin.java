package chrono.search;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Base64;
import java.util.List;
import java.util.function.UnaryOperator;

import org.opensearch.OpenSearchSecurityException;
import org.opensearch.common.settings.Setting;
import org.opensearch.common.settings.Setting.Property;
import org.opensearch.common.settings.Settings;
import org.opensearch.common.util.concurrent.ThreadContext;
import org.opensearch.core.common.io.stream.NamedWriteableRegistry;
import org.opensearch.core.rest.RestStatus;
import org.opensearch.plugins.ActionPlugin;
import org.opensearch.plugins.NetworkPlugin;
import org.opensearch.plugins.Plugin;
import org.opensearch.rest.BytesRestResponse;
import org.opensearch.rest.RestHandler;
import org.opensearch.transport.TransportInterceptor;
import org.opensearch.transport.TransportRequest;
import org.opensearch.transport.TransportRequestHandler;

/**
 * HTTP basic authentication for Chrono's single search node, and a transport port that serves
 * nobody.
 *
 * <p>Why not OpenSearch's own security plugin: it makes TLS on the transport layer mandatory (a
 * CA and node certificates to generate, keep and rotate), initialises users and roles through a
 * security index and its admin tool, and pulls some forty jars onto a classpath this launcher
 * assembles by hand. What Chrono needs of it on a one-node, loopback-only test and demo engine is
 * "no request without the installation's password", which is what this plugin does with the same
 * extension point the security plugin uses for its REST filter ({@link
 * ActionPlugin#getRestHandlerWrapper}).
 *
 * <ul>
 *   <li><b>HTTP</b>: every REST handler is wrapped; a request whose {@code Authorization: Basic}
 *       header names no user of {@link UsersFile} gets 401 with {@code WWW-Authenticate} and never
 *       reaches the handler. No roles: a user may do everything.
 *   <li><b>Transport</b> (the node-to-node port, 100 above HTTP): a single-node cluster has no
 *       peer, and its own requests to itself never leave the process (channel type
 *       {@code direct}), so every request arriving over TCP is refused: without this the port
 *       would serve every action, searches included, to any local process that speaks the
 *       protocol.
 * </ul>
 */
public final class ChronoAuthPlugin extends Plugin implements ActionPlugin, NetworkPlugin {

    /** The users file; without it the plugin is inert (the node runs open, and says so). */
    public static final Setting<String> USERS_FILE = Setting.simpleString(
        "chrono.auth.users_file",
        Property.NodeScope
    );
    static final String REALM = "chrono-search";
    private static final String BASIC = "basic ";

    private final UsersFile users;

    public ChronoAuthPlugin(Settings settings) {
        String file = USERS_FILE.get(settings);
        this.users = file.isEmpty() ? null : new UsersFile(Path.of(file));
    }

    @Override
    public List<Setting<?>> getSettings() {
        return List.of(USERS_FILE);
    }

    @Override
    public UnaryOperator<RestHandler> getRestHandlerWrapper(ThreadContext threadContext) {
        if (users == null) {
            return UnaryOperator.identity();
        }
        return handler -> new AuthenticatingHandler(handler, users);
    }

    @Override
    public List<TransportInterceptor> getTransportInterceptors(
        NamedWriteableRegistry namedWriteableRegistry,
        ThreadContext threadContext
    ) {
        if (users == null) {
            return List.of();
        }
        return List.of(new LocalOnlyInterceptor());
    }

    /** Whether an {@code Authorization} header names a user of the file with its password. */
    static boolean authenticated(String authorization, UsersFile users) {
        if (authorization == null || authorization.length() <= BASIC.length()
            || !authorization.regionMatches(true, 0, BASIC, 0, BASIC.length())) {
            return false;
        }
        String decoded;
        try {
            byte[] raw = Base64.getDecoder().decode(authorization.substring(BASIC.length()).strip());
            decoded = new String(raw, StandardCharsets.UTF_8);
        } catch (IllegalArgumentException e) {
            return false;
        }
        int colon = decoded.indexOf(':');
        return colon > 0 && users.verify(decoded.substring(0, colon), decoded.substring(colon + 1));
    }

    /** A REST handler that runs only for an authenticated request. */
    static final class AuthenticatingHandler extends RestHandler.Wrapper {
        private final UsersFile users;

        AuthenticatingHandler(RestHandler delegate, UsersFile users) {
            super(delegate);
            this.users = users;
        }

        @Override
        public void handleRequest(
            org.opensearch.rest.RestRequest request,
            org.opensearch.rest.RestChannel channel,
            org.opensearch.client.node.NodeClient client
        ) throws Exception {
            if (authenticated(request.header("Authorization"), users)) {
                super.handleRequest(request, channel, client);
                return;
            }
            BytesRestResponse response = new BytesRestResponse(
                RestStatus.UNAUTHORIZED,
                "application/json; charset=UTF-8",
                "{\"error\":\"authentication required: give the user and password of the "
                    + "installation's credentials file (SEARCH_URL http://USER:PASSWORD@host:port)\","
                    + "\"status\":401}"
            );
            response.addHeader("WWW-Authenticate", "Basic realm=\"" + REALM + "\", charset=\"UTF-8\"");
            channel.sendResponse(response);
        }
    }

    /** Refuses every transport request that arrived over the network. */
    static final class LocalOnlyInterceptor implements TransportInterceptor {
        @Override
        public <T extends TransportRequest> TransportRequestHandler<T> interceptHandler(
            String action,
            String executor,
            boolean forceExecution,
            TransportRequestHandler<T> actualHandler
        ) {
            return (request, channel, task) -> {
                if ("direct".equals(channel.getChannelType())) {
                    actualHandler.messageReceived(request, channel, task);
                    return;
                }
                channel.sendResponse(
                    new OpenSearchSecurityException(
                        "the transport port of Chrono's single search node serves no peer; "
                            + "use the HTTP API with credentials",
                        RestStatus.FORBIDDEN
                    )
                );
            };
        }
    }
}
