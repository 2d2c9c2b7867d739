import { HashRouter, NavLink, Navigate, Route, Routes } from 'react-router';
import { SearchPage } from './pages/SearchPage';
import { TracePage } from './pages/TracePage';
import { AnomaliesPage } from './pages/AnomaliesPage';
import { FlamePage } from './pages/FlamePage';
import { ServiceMapPage } from './pages/ServiceMapPage';
import { IncidentsPage } from './pages/IncidentsPage';
import { MetricsPage } from './pages/MetricsPage';
import { TokenPrompt } from './components/TokenPrompt';

// A HashRouter keeps every page at the server's "/" so the relative asset
// paths of the build resolve the same from any route.
export function App() {
  return (
    <HashRouter>
      <nav className="topnav">
        <span className="brand">Rootline</span>
        <NavLink to="/search">Search</NavLink>
        <NavLink to="/incidents">Incidents</NavLink>
        <NavLink to="/anomalies">Anomalies</NavLink>
        <NavLink to="/metrics">Metrics</NavLink>
        <NavLink to="/map">Service map</NavLink>
        <TraceLink />
      </nav>
      <main>
        <Routes>
          <Route path="/" element={<Navigate to="/search" replace />} />
          <Route path="/search" element={<SearchPage />} />
          <Route path="/trace/:traceId" element={<TracePage />} />
          <Route path="/incidents" element={<IncidentsPage />} />
          <Route path="/anomalies" element={<AnomaliesPage />} />
          <Route path="/flame/:artifactId" element={<FlamePage />} />
          <Route path="/map" element={<ServiceMapPage />} />
          <Route path="/metrics" element={<MetricsPage />} />
          <Route path="*" element={<p className="notice">No such page. Use the links above.</p>} />
        </Routes>
      </main>
      <TokenPrompt />
    </HashRouter>
  );
}

/** TraceLink opens a trace by id: the third navigation entry. */
function TraceLink() {
  return (
    <form
      className="tracelink"
      onSubmit={(e) => {
        e.preventDefault();
        const input = e.currentTarget.elements.namedItem('traceid') as HTMLInputElement | null;
        const id = input?.value.trim();
        if (id) window.location.hash = `#/trace/${encodeURIComponent(id)}`;
      }}
    >
      <NavLink to="/trace" onClick={(e) => e.preventDefault()} className={({ isActive }) => (isActive ? 'active' : '')}>
        Trace
      </NavLink>
      <input name="traceid" placeholder="trace id" aria-label="Trace id" size={20} />
    </form>
  );
}
